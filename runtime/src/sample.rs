//! Text from a trained language model, token by token, as nanoGPT's `generate`: the logits of the
//! last position divided by the temperature, all but the `top_k` largest dropped, a softmax, and
//! one draw; the drawn token joins the context (its last `context` tokens) for the next.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::layer::StepContext;
use crate::model::{position_rows, vocabulary_limit, DistributedModel};
use crate::tensor::Matrix;

/// How to draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleConfig {
    /// Tokens to generate.
    pub tokens: usize,
    /// Positive: below 1 sharpens the distribution, above 1 flattens it (nanoGPT's default: 0.8).
    pub temperature: f32,
    /// Keep only the `top_k` likeliest tokens (nanoGPT's default: 200); `None`, or a number at
    /// least the vocabulary, keeps all.
    pub top_k: Option<usize>,
    /// Seeds the draws: the same seed, model and prompt draw the same tokens.
    pub seed: u64,
}

impl Default for SampleConfig {
    fn default() -> Self {
        SampleConfig { tokens: 500, temperature: 0.8, top_k: Some(200), seed: 1337 }
    }
}

/// `config.tokens` tokens continuing `prompt`, drawn from `model` over the first `vocab` of its
/// outputs (a model may have more outputs than the text has tokens), seeing at most the last
/// `context` tokens. An output that is not finite is an error, not a draw; so is a request the
/// model cannot serve (see `check_request`), refused before the first draw.
pub fn generate<M: DistributedModel>(
    model: &M,
    prompt: &[usize],
    (vocab, context): (usize, usize),
    config: &SampleConfig,
) -> Result<Vec<usize>> {
    let mut drawn = Vec::new();
    generate_each(model, prompt, (vocab, context), config, |token| drawn.push(token))?;
    Ok(drawn)
}

/// `generate`, handing each token to `each` as it is drawn, so that a long sample can be shown
/// as it comes (and what was drawn is not lost to an error or a stop).
pub fn generate_each<M: DistributedModel>(
    model: &M,
    prompt: &[usize],
    (vocab, context): (usize, usize),
    config: &SampleConfig,
    mut each: impl FnMut(usize),
) -> Result<()> {
    check_request::<M>(prompt, (vocab, context), config)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut tokens = prompt.to_vec();
    let mut ws = M::Workspace::default();
    let mut input = Matrix::default();
    let mut weights = Vec::with_capacity(vocab);
    for _ in 0..config.tokens {
        let window = &tokens[tokens.len().saturating_sub(context)..];
        input.resize(window.len(), 1);
        for (x, &t) in input.as_mut_slice().iter_mut().zip(window) {
            *x = t as f32;
        }
        let logits = model.forward_with(&StepContext::sequences(1, window.len()), &input, &mut ws);
        let last = &logits.row(window.len() - 1)[..vocab.min(logits.cols())];
        if let Some(token) = last.iter().position(|l| !l.is_finite()) {
            return Err(Error::NonFiniteOutput { token, drawn: tokens.len() - prompt.len(), value: last[token] });
        }
        let token = draw(last, config, &mut weights, &mut rng);
        each(token);
        tokens.push(token);
    }
    Ok(())
}

/// Refuses, naming the value, what `generate` cannot draw from: an empty prompt, a context the
/// model's position table cannot hold, a model that reads no token ids (one feature per sample),
/// a vocabulary past what it reads and predicts (or a prompt
/// token past the vocabulary), a temperature that is not a positive number, or a top-k of 0.
/// `generate` checks it first; a caller that prints before the first token (a heading) checks
/// it before that.
pub fn check_request<M: DistributedModel>(
    prompt: &[usize],
    (vocab, context): (usize, usize),
    config: &SampleConfig,
) -> Result<()> {
    let model = &M::SCHEDULE.model;
    let outputs = M::SCHEDULE.io_widths().map_or(0, |(_, outputs)| outputs);
    let readable = vocabulary_limit::<M>().unwrap_or(outputs);
    let features = M::SCHEDULE.io_widths().map(|(inputs, _)| inputs).filter(|&inputs| inputs != 1);
    let problem = if let Some(features) = features {
        format!("{model} takes {features} features per sample, not a token id: it does not read tokens")
    } else if prompt.is_empty() {
        "an empty prompt: give at least one token to continue".to_string()
    } else if context == 0 {
        "a context of 0 tokens: the model must see at least the last one".to_string()
    } else if let Some(rows) = position_rows::<M>().filter(|&rows| context > rows) {
        format!("a context of {context} tokens, but {model}'s position embedding has rows for {rows}")
    } else if vocab == 0 || vocab > readable {
        format!("a vocabulary of {vocab} tokens, but {model} reads and predicts {readable}")
    } else if let Some((at, token)) = prompt.iter().enumerate().find(|&(_, &t)| t >= vocab) {
        format!("prompt token {at} is {token}, past the vocabulary of {vocab} tokens")
    } else if !(config.temperature.is_finite() && config.temperature > 0.0) {
        format!(
            "a temperature of {}: it must be a positive number (below 1 sharpens the distribution, above 1 \
             flattens it)",
            config.temperature
        )
    } else if config.top_k == Some(0) {
        "a top-k of 0 keeps no token: give at least 1, or none to keep every token".to_string()
    } else {
        return Ok(());
    };
    Err(Error::Config(format!("sampling from {problem}")))
}

/// One token from `logits`: scaled, cut to the top k, normalised, drawn.
fn draw(logits: &[f32], config: &SampleConfig, weights: &mut Vec<f64>, rng: &mut ChaCha8Rng) -> usize {
    let temperature = f64::from(config.temperature);
    let scaled = logits.iter().map(|&l| f64::from(l) / temperature);
    weights.clear();
    weights.extend(scaled);
    if let Some(k) = config.top_k.filter(|&k| k < weights.len()) {
        let mut sorted = weights.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let threshold = sorted[k - 1];
        weights.iter_mut().filter(|w| **w < threshold).for_each(|w| *w = f64::NEG_INFINITY);
    }
    let max = weights.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    weights.iter_mut().for_each(|w| *w = (*w - max).exp());
    let total: f64 = weights.iter().sum();
    let mut target = rng.random::<f64>() * total;
    for (token, &w) in weights.iter().enumerate() {
        if target < w {
            return token;
        }
        target -= w;
    }
    weights.iter().rposition(|&w| w > 0.0).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_one_is_the_likeliest_and_a_low_temperature_nearly_so() {
        let logits = [0.1f32, 2.0, 1.9, -3.0];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut weights = Vec::new();
        let greedy = SampleConfig { top_k: Some(1), temperature: 5.0, ..SampleConfig::default() };
        assert!((0..50).all(|_| draw(&logits, &greedy, &mut weights, &mut rng) == 1));
        let cold = SampleConfig { top_k: None, temperature: 1e-3, ..SampleConfig::default() };
        assert!((0..50).all(|_| draw(&logits, &cold, &mut weights, &mut rng) == 1));
        // Top 2 at a high temperature: both kept tokens come up, the others never.
        let warm = SampleConfig { top_k: Some(2), temperature: 10.0, ..SampleConfig::default() };
        let drawn: Vec<usize> = (0..200).map(|_| draw(&logits, &warm, &mut weights, &mut rng)).collect();
        assert!(drawn.contains(&1) && drawn.contains(&2) && drawn.iter().all(|&t| t == 1 || t == 2));
    }
}
