//! What looks amiss in the shards a run is about to read, for a note before step 1: nothing
//! that stops a run (a file may be read for training whatever its name), but what a user would
//! want told: a held-out shard named for training, and numbered shards that skip a number (a
//! shard missing from a download or a copy).

use std::path::{Path, PathBuf};

use super::names::{self, split_part};

/// The notes `path`'s shards deserve, each to follow `path` in a line: `train` as `locate` found
/// them for training, `val` as held out. Empty when all looks as `prepare` (or llm.c) writes it.
pub fn shard_doubts(path: &Path, train: &[PathBuf], val: &[PathBuf]) -> Vec<String> {
    let mut doubts = Vec::new();
    if let [only] = train {
        if only == path && name_of(only).and_then(|n| split_part(&n)).is_some_and(|(_, train)| !train) {
            doubts.push("named as a held-out shard (`val`), and read here for training".to_string());
        }
    }
    for (split, shards) in [("training", train), ("held-out", val)] {
        if let Some(gap) = first_gap(shards) {
            doubts.push(format!("the {split} shards skip {gap}: is a shard missing?"));
        }
    }
    doubts
}

fn name_of(path: &Path) -> Option<String> {
    Some(path.file_name()?.to_string_lossy().into_owned())
}

fn shard_number(path: &Path) -> Option<(u64, String)> {
    names::shard_number(&name_of(path)?)
}

/// The first numbers missing between the lowest and the highest of `shards`' numbers, said as
/// `number 000002 (between 000001 and 000003)`; `None` when there are no gaps, or the shards are
/// not all numbered.
fn first_gap(shards: &[PathBuf]) -> Option<String> {
    let mut numbers: Vec<(u64, String)> = shards.iter().map(|p| shard_number(p)).collect::<Option<_>>()?;
    numbers.sort();
    numbers.windows(2).find(|w| w[1].0 > w[0].0 + 1).map(|w| {
        let (before, after) = (&w[0].1, &w[1].1);
        let missing = w[1].0 - w[0].0 - 1;
        let width = before.len();
        let first = format!("{:0width$}", w[0].0 + 1);
        match missing {
            1 => format!("number {first} (between {before} and {after})"),
            n => format!("{n} numbers from {first} (between {before} and {after})"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(|n| Path::new("shards").join(n)).collect()
    }

    #[test]
    fn a_held_out_file_read_for_training_and_missing_numbers_are_noted() {
        let all_there = paths(&["t_train_000001.bin", "t_train_000002.bin"]);
        assert!(shard_doubts(Path::new("shards"), &all_there, &paths(&["t_val_000000.bin"])).is_empty());
        let gap = paths(&["t_train_000001.bin", "t_train_000003.bin", "t_train_000004.bin"]);
        assert_eq!(
            shard_doubts(Path::new("shards"), &gap, &[]),
            ["the training shards skip number 000002 (between 000001 and 000003): is a shard missing?"]
        );
        let gaps = paths(&["t_val_7.bin", "t_val_10.bin"]);
        assert_eq!(
            shard_doubts(Path::new("shards"), &all_there, &gaps),
            ["the held-out shards skip 2 numbers from 8 (between 7 and 10): is a shard missing?"]
        );
        let val = Path::new("shards/t_val_000000.bin");
        assert_eq!(
            shard_doubts(val, &[val.to_path_buf()], &[]),
            ["named as a held-out shard (`val`), and read here for training"]
        );
        // Unnumbered shards, or one training file, give no note.
        assert!(shard_doubts(Path::new("s"), &paths(&["t_train.bin"]), &paths(&["t_val.bin"])).is_empty());
        let train = Path::new("shards/t_train_000001.bin");
        assert!(shard_doubts(train, &[train.to_path_buf()], &[]).is_empty());
    }
}
