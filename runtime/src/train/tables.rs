//! Samples against the model's tables, before step 1: sequences no longer than its position
//! embedding has rows, and token ids it can both look up and predict. Unchecked, the first batch
//! past a table stops the run at the step that reads it, perhaps hours in (a rare character of a
//! text), or a layer's assertion does.

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::{position_rows, vocabulary_limit, DistributedModel};

/// Refuses `data` (`which`: "training" or "held-out") whose samples do not fit `M`'s tables.
pub(super) fn check<M: DistributedModel>(data: &dyn Dataset, which: &str) -> Result<()> {
    let model = &M::SCHEDULE.model;
    let positions = data.positions();
    if let Some(rows) = position_rows::<M>().filter(|&rows| positions > rows) {
        return Err(Error::Dataset(format!(
            "the {which} data ({}) has sequences of {positions} positions, but {model}'s position embedding has rows \
             for {rows}: give sequences of at most {rows}",
            data.describe()
        )));
    }
    if let (Some(classes), Some((_, outputs))) = (data.classes(), M::SCHEDULE.io_widths()) {
        if classes > outputs {
            return Err(Error::Dataset(format!(
                "the {which} data ({}) labels samples with {classes} classes, but {model} outputs {outputs}: give \
                 data of at most {outputs} classes, or a model with as many outputs as the data has classes",
                data.describe()
            )));
        }
    }
    if let (Some(count), Some(limit)) = (data.token_count(), vocabulary_limit::<M>()) {
        if count > limit {
            return Err(Error::Dataset(format!(
                "the {which} data ({}) holds token ids up to {}, past {model}'s vocabulary of {limit} tokens (the \
                 fewer of its token embedding's rows and its output classes)",
                data.describe(),
                count - 1
            )));
        }
    }
    Ok(())
}
