use std::collections::HashMap;

/// A word counter.
#[derive(Default)]
pub struct Counter {
    counts: HashMap<String, usize>,
}

impl Counter {
    pub fn add(&mut self, word: &str) {
        *self.counts.entry(word.to_string()).or_insert(0) += 1;
    }

    pub fn get(&self, word: &str) -> usize {
        self.counts.get(word).copied().unwrap_or(0)
    }
}

pub fn tokenize(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}
