// SPDX-License-Identifier: MIT
//! A paged KV cache for a decode loop, over kvpool's Rust binding.
//!
//! One prompt is prefilled (its K and V rows written into the pool's
//! pages), then forked into four beams.  Four std::thread workers share
//! the cache: each decodes its own beam (append a slot, copy-on-write of
//! the shared last page on the first step, write the new token's K and V,
//! attend over the whole sequence read back from the pages).  At the end
//! every beam must still see the prompt's rows exactly as written, the
//! copies must be one per beam, and kvp_manager_check must pass.
//!
//! Run from the crate: cargo run --example rust_paged_cache
use kvpool::{DType, Layout, Manager, ManagerConfig, Pool, PoolConfig};

const LAYERS: u32 = 2;
const HEADS: u32 = 2;
const DIM: u32 = 8;
const ROW: usize = (HEADS * DIM) as usize;

/// The "projection" of a token at a position: deterministic fake K / V.
fn kv_row(token: u32, pos: u32, layer: u32) -> (Vec<f32>, Vec<f32>) {
    let k = (0..ROW)
        .map(|i| ((token * 31 + pos * 7 + layer * 3 + i as u32) % 97) as f32 / 97.0)
        .collect();
    let v = (0..ROW)
        .map(|i| ((token * 17 + pos * 5 + layer + i as u32) % 89) as f32 / 89.0)
        .collect();
    (k, v)
}

struct PagedKvCache {
    m: Manager,
}

impl PagedKvCache {
    fn new(blocks: u32, block_tokens: u32) -> kvpool::Result<PagedKvCache> {
        let layout = Layout {
            num_layers: LAYERS,
            num_kv_heads: HEADS,
            head_dim: DIM,
            dtype: DType::F32,
        };
        let pool = Pool::new(&PoolConfig::new(blocks, block_tokens).layout(layout))?;
        Ok(PagedKvCache {
            m: Manager::new(&pool, &ManagerConfig::default())?,
        })
    }

    fn prefill(&self, seq: u64, prompt: &[u32]) -> kvpool::Result<()> {
        self.m.create(seq, prompt.len() as u32)?;
        for (pos, &tok) in prompt.iter().enumerate() {
            for layer in 0..LAYERS {
                let (k, v) = kv_row(tok, pos as u32, layer);
                self.m.write(seq, pos as u32, layer, &k, &v)?;
            }
        }
        Ok(())
    }

    /// One decode step: a slot for the token, its K and V, and attention
    /// of a query over the sequence's pages (layer 0).  Returns whether
    /// the step copied a shared page.
    fn decode(&self, seq: u64, token: u32) -> kvpool::Result<(bool, Vec<f32>)> {
        let copied = self.m.append(seq, 1)?.cow.is_some();
        let pos = self.m.info(seq)?.num_tokens - 1;
        for layer in 0..LAYERS {
            let (k, v) = kv_row(token, pos, layer);
            self.m.write(seq, pos, layer, &k, &v)?;
        }
        let (keys, vals) = self.m.gather::<f32>(seq, 0)?;
        let (q, _) = kv_row(token, pos, 0);
        let scores: Vec<f32> = keys
            .chunks(ROW)
            .map(|k| k.iter().zip(&q).map(|(a, b)| a * b).sum())
            .collect();
        let max = scores.iter().cloned().fold(f32::MIN, f32::max);
        let w: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f32 = w.iter().sum();
        let mut out = vec![0f32; ROW];
        for (wi, v) in w.iter().zip(vals.chunks(ROW)) {
            for (o, x) in out.iter_mut().zip(v) {
                *o += wi / sum * x;
            }
        }
        Ok((copied, out))
    }
}

fn main() -> kvpool::Result<()> {
    let cache = PagedKvCache::new(256, 16)?;
    let prompt: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 1000).collect();
    cache.prefill(1, &prompt)?;
    let beams: Vec<u64> = (100..104).collect();
    for &b in &beams {
        cache.m.fork(1, b)?;
    }
    let steps = 30;
    let copies: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> = beams
            .iter()
            .map(|&beam| {
                let cache = &cache;
                let prompt = &prompt;
                s.spawn(move || -> kvpool::Result<usize> {
                    let mut copies = 0;
                    for step in 0..steps {
                        let (copied, out) = cache.decode(beam, (beam as u32) * 1000 + step)?;
                        copies += copied as usize;
                        assert!(out.iter().all(|x| x.is_finite()));
                    }
                    // The prompt's rows are shared (or copied) intact.
                    let (mut k, mut v) = (vec![0f32; ROW], vec![0f32; ROW]);
                    for (pos, &tok) in prompt.iter().enumerate() {
                        cache.m.read(beam, pos as u32, 1, &mut k, &mut v)?;
                        assert_eq!(
                            (k.clone(), v.clone()),
                            kv_row(tok, pos as u32, 1),
                            "beam {} pos {}",
                            beam,
                            pos
                        );
                    }
                    let last = prompt.len() as u32 + steps - 1;
                    cache.m.read(beam, last, 0, &mut k, &mut v)?;
                    assert_eq!(k, kv_row((beam as u32) * 1000 + steps - 1, last, 0).0);
                    Ok(copies)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect::<kvpool::Result<_>>()
    })?;
    let st = cache.m.stats();
    assert_eq!(copies, vec![1; beams.len()], "one copy-on-write per beam");
    assert_eq!(st.cow_copies, beams.len() as u64);
    cache.m.check()?;
    println!(
        "rust_paged_cache: {} beams x {} steps over a {}-token prompt: {} copies, {} of {} blocks used, {} bytes each",
        beams.len(),
        steps,
        prompt.len(),
        st.cow_copies,
        st.blocks_used,
        st.blocks_total,
        st.bytes_per_block
    );
    for &b in &beams {
        cache.m.free(b)?;
    }
    cache.m.free(1)?;
    assert_eq!(cache.m.pool().stats().used, 0);
    Ok(())
}
