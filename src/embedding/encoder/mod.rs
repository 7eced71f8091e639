//! The BERT encoder of all-MiniLM-L6-v2, evaluated on packed (unpadded) token batches.
//!
//! This is a hand-written forward pass over flat `f32` buffers; matrix products go through the
//! `gemm` crate (the same kernels candle uses on CPU). We do not call
//! `candle_transformers::models::bert` because profiling showed where its time goes on our 2
//! cores (see `src/embedding/README.md`): it pads every batch to the longest sequence and then
//! spends work on masked positions, allocates a fresh tensor for every elementwise step, and
//! multithreads each small matrix product instead of whole batches. Here the sequences of a chunk
//! are concatenated into one `[tokens × hidden]` matrix, so the dense layers (almost all of the
//! FLOPs) never touch a padding position, and attention runs per sequence, so no mask is needed.
//! One chunk runs on one thread; the caller parallelises over chunks.
//!
//! Weights are read from `model.safetensors` one tensor at a time (`weights`); nothing here does
//! IO after [`Encoder::load`].

use std::path::Path;

use serde::Deserialize;

use super::Error;

/// The subset of a Hugging Face BERT `config.json` the encoder needs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BertConfig {
    pub(crate) vocab_size: usize,
    pub(crate) hidden_size: usize,
    pub(crate) num_hidden_layers: usize,
    pub(crate) num_attention_heads: usize,
    pub(crate) intermediate_size: usize,
    pub(crate) max_position_embeddings: usize,
    #[serde(default = "default_layer_norm_eps")]
    pub(crate) layer_norm_eps: f64,
    #[serde(default = "default_hidden_act")]
    pub(crate) hidden_act: String,
}

fn default_layer_norm_eps() -> f64 {
    1e-12
}

fn default_hidden_act() -> String {
    "gelu".to_string()
}

/// Scale and shift of one layer normalisation.
struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

/// A dense layer `y = x·Wᵀ + b`, with `W` stored transposed (`[in × out]`, row-major) so the
/// right-hand operand of the product is contiguous.
struct Linear {
    weight_t: Vec<f32>,
    bias: Vec<f32>,
    n_in: usize,
    n_out: usize,
}

/// One transformer layer. Query, key and value projections are fused into one `[H × 3H]`
/// product so the packed hidden states are read once.
struct Layer {
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    ffn_in: Linear,
    ffn_out: Linear,
    output_norm: LayerNorm,
}

/// The loaded encoder. Immutable after loading; shared between worker threads.
pub(crate) struct Encoder {
    config: BertConfig,
    word_embeddings: Vec<f32>,
    position_embeddings: Vec<f32>,
    token_type_embedding: Vec<f32>,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
}

/// Reusable per-thread buffers, sized for the largest chunk seen so far.
#[derive(Default)]
pub(crate) struct Scratch {
    hidden: Vec<f32>,
    qkv: Vec<f32>,
    context: Vec<f32>,
    projected: Vec<f32>,
    intermediate: Vec<f32>,
    scores: Vec<f32>,
}

mod kernels;
mod weights;

use kernels::*;
use weights::WeightStore;

impl Encoder {
    /// Load `config.json` and `model.safetensors` from `model_dir`.
    pub(crate) fn load(model_dir: &Path) -> Result<Self, Error> {
        let config = read_config(model_dir)?;
        let weights_path = model_dir.join("model.safetensors");
        let mut store = WeightStore::open(&weights_path)?;
        let hidden = config.hidden_size;
        let eps = config.layer_norm_eps as f32;

        let word_embeddings =
            store.take("embeddings.word_embeddings.weight", &[config.vocab_size, hidden])?;
        let position_embeddings = store.take(
            "embeddings.position_embeddings.weight",
            &[config.max_position_embeddings, hidden],
        )?;
        let token_types = store.take_any_rows("embeddings.token_type_embeddings.weight", hidden)?;
        let token_type_embedding = token_types[..hidden].to_vec();
        let embedding_norm = store.layer_norm("embeddings.LayerNorm", hidden, eps)?;

        let layers = (0..config.num_hidden_layers)
            .map(|index| store.layer(&format!("encoder.layer.{index}"), &config, eps))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            config,
            word_embeddings,
            position_embeddings,
            token_type_embedding,
            embedding_norm,
            layers,
        })
    }

    /// Width of the output vectors.
    pub(crate) fn hidden_size(&self) -> usize {
        self.config.hidden_size
    }

    /// Longest sequence the position table allows.
    pub(crate) fn max_positions(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// Number of distinct token ids.
    pub(crate) fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    /// Encode a chunk of tokenised sequences on the calling thread and return, per sequence, the
    /// mean of its final hidden states (all its tokens count: there is no padding) scaled to unit
    /// length. Ids must be `< vocab_size` and each sequence at most `max_positions` long and
    /// non-empty; the caller (tokenizer output) guarantees both.
    pub(crate) fn embed_chunk(&self, sequences: &[&[u32]], scratch: &mut Scratch) -> Vec<Vec<f32>> {
        let hidden = self.config.hidden_size;
        let n_tokens: usize = sequences.iter().map(|ids| ids.len()).sum();
        if n_tokens == 0 {
            return sequences.iter().map(|_| vec![0.0; hidden]).collect();
        }
        let intermediate = self.config.intermediate_size;
        resize(&mut scratch.hidden, n_tokens * hidden);
        resize(&mut scratch.qkv, n_tokens * 3 * hidden);
        resize(&mut scratch.context, n_tokens * hidden);
        resize(&mut scratch.projected, n_tokens * hidden);
        resize(&mut scratch.intermediate, n_tokens * intermediate);

        self.embed_tokens(sequences, &mut scratch.hidden);
        for layer in &self.layers {
            self.layer_forward(layer, sequences, n_tokens, scratch);
        }
        pool_and_normalise(sequences, &scratch.hidden[..n_tokens * hidden], hidden)
    }

    /// Word + position + token-type embeddings, then layer norm, into `out` (`[tokens × H]`).
    fn embed_tokens(&self, sequences: &[&[u32]], out: &mut [f32]) {
        let hidden = self.config.hidden_size;
        let mut row = 0;
        for ids in sequences {
            for (position, &id) in ids.iter().enumerate() {
                let word = &self.word_embeddings[id as usize * hidden..][..hidden];
                let pos = &self.position_embeddings[position * hidden..][..hidden];
                let dst = &mut out[row * hidden..][..hidden];
                for (((d, w), p), t) in
                    dst.iter_mut().zip(word).zip(pos).zip(&self.token_type_embedding)
                {
                    *d = w + p + t;
                }
                row += 1;
            }
        }
        self.embedding_norm.apply_rows(&mut out[..row * hidden]);
    }

    fn layer_forward(
        &self,
        layer: &Layer,
        sequences: &[&[u32]],
        n_tokens: usize,
        scratch: &mut Scratch,
    ) {
        let hidden = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let head_dim = hidden / heads;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let states = &mut scratch.hidden[..n_tokens * hidden];
        let qkv = &mut scratch.qkv[..n_tokens * 3 * hidden];
        let context = &mut scratch.context[..n_tokens * hidden];

        layer.qkv.forward(states, n_tokens, qkv);

        // Self-attention, one sequence and one head at a time: scores = Q·Kᵀ/√d, row softmax,
        // context = P·V. Q, K and V of a head are column blocks of the fused qkv rows.
        let qkv_stride = 3 * hidden;
        let mut offset = 0;
        for ids in sequences {
            let len = ids.len();
            resize(&mut scratch.scores, len * len);
            let scores = &mut scratch.scores[..len * len];
            let rows = &qkv[offset * qkv_stride..(offset + len) * qkv_stride];
            for head in 0..heads {
                let q = &rows[head * head_dim..];
                let k = &rows[hidden + head * head_dim..];
                let v = &rows[2 * hidden + head * head_dim..];
                // scores[i][j] = scale · Σ_c q[i][c]·k[j][c]; the right operand is Kᵀ, read
                // through strides (column j of Kᵀ is row j of K).
                matmul(
                    MatMul { m: len, n: len, k: head_dim, scale, accumulate: false },
                    (q, qkv_stride, 1),
                    (k, 1, qkv_stride),
                    (scores, len, 1),
                );
                for row in scores.chunks_exact_mut(len) {
                    softmax_in_place(row);
                }
                let out = &mut context[offset * hidden + head * head_dim..];
                matmul(
                    MatMul { m: len, n: head_dim, k: len, scale: 1.0, accumulate: false },
                    (scores, len, 1),
                    (v, qkv_stride, 1),
                    (out, hidden, 1),
                );
            }
            offset += len;
        }

        let projected = &mut scratch.projected[..n_tokens * hidden];
        layer.attention_out.forward(context, n_tokens, projected);
        add_in_place(states, projected);
        layer.attention_norm.apply_rows(states);

        let intermediate = &mut scratch.intermediate[..n_tokens * self.config.intermediate_size];
        layer.ffn_in.forward(states, n_tokens, intermediate);
        gelu_in_place(intermediate);
        layer.ffn_out.forward(intermediate, n_tokens, projected);
        add_in_place(states, projected);
        layer.output_norm.apply_rows(states);
    }
}

/// Reads and checks `config.json` in `model_dir`: only exact GELU and a hidden size divisible by
/// the head count are supported.
fn read_config(model_dir: &Path) -> Result<BertConfig, Error> {
    let config_path = model_dir.join("config.json");
    let config_text = std::fs::read_to_string(&config_path)
        .map_err(|err| Error::Load { path: config_path.clone(), message: err.to_string() })?;
    let config: BertConfig = serde_json::from_str(&config_text)
        .map_err(|err| Error::Load { path: config_path.clone(), message: err.to_string() })?;
    if config.hidden_act != "gelu" {
        return Err(Error::Load {
            path: config_path,
            message: format!("unsupported hidden_act {:?} (only exact gelu)", config.hidden_act),
        });
    }
    if config.num_attention_heads == 0
        || !config.hidden_size.is_multiple_of(config.num_attention_heads)
    {
        return Err(Error::Load {
            path: config_path,
            message: "hidden_size is not a multiple of num_attention_heads".to_string(),
        });
    }
    Ok(config)
}

impl LayerNorm {
    fn apply_rows(&self, rows: &mut [f32]) {
        let width = self.weight.len();
        for row in rows.chunks_exact_mut(width) {
            let mean = row.iter().sum::<f32>() / width as f32;
            let variance = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / width as f32;
            let inverse = 1.0 / (variance + self.eps).sqrt();
            for ((x, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *x = (*x - mean) * inverse * w + b;
            }
        }
    }
}

impl Linear {
    /// `out[t] = input[t]·Wᵀ + b` for `n_rows` rows.
    fn forward(&self, input: &[f32], n_rows: usize, out: &mut [f32]) {
        for row in out[..n_rows * self.n_out].chunks_exact_mut(self.n_out) {
            row.copy_from_slice(&self.bias);
        }
        matmul(
            MatMul { m: n_rows, n: self.n_out, k: self.n_in, scale: 1.0, accumulate: true },
            (input, self.n_in, 1),
            (&self.weight_t, self.n_out, 1),
            (out, self.n_out, 1),
        );
    }

    /// One layer whose outputs are the outputs of `parts`, side by side.
    fn concat_outputs(parts: &[Linear]) -> Linear {
        let n_in = parts.first().map_or(0, |part| part.n_in);
        let n_out: usize = parts.iter().map(|part| part.n_out).sum();
        let mut weight_t = Vec::with_capacity(n_in * n_out);
        for row in 0..n_in {
            for part in parts {
                weight_t.extend_from_slice(&part.weight_t[row * part.n_out..][..part.n_out]);
            }
        }
        let bias = parts.iter().flat_map(|part| part.bias.iter().copied()).collect();
        Linear { weight_t, bias, n_in, n_out }
    }
}

/// Shape and scaling of one product `dst = scale·(lhs·rhs) (+ dst if accumulate)`.
#[derive(Clone, Copy)]
struct MatMul {
    m: usize,
    n: usize,
    k: usize,
    scale: f32,
    accumulate: bool,
}

/// `dst[m×n] (+)= scale · lhs[m×k] · rhs[k×n]`, each operand given as
/// `(slice starting at element (0,0), row stride, column stride)`.
///
/// Panics if any operand's last element lies outside its slice; that check is what makes the
/// `gemm` call below sound.
fn matmul(
    shape: MatMul,
    lhs: (&[f32], usize, usize),
    rhs: (&[f32], usize, usize),
    dst: (&mut [f32], usize, usize),
) {
    let MatMul { m, n, k, scale, accumulate } = shape;
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, row_stride: usize, col_stride: usize| {
        (rows.saturating_sub(1)) * row_stride + cols.saturating_sub(1) * col_stride
    };
    assert!(k == 0 || last(m, k, lhs.1, lhs.2) < lhs.0.len(), "matmul lhs out of bounds");
    assert!(k == 0 || last(k, n, rhs.1, rhs.2) < rhs.0.len(), "matmul rhs out of bounds");
    assert!(last(m, n, dst.1, dst.2) < dst.0.len(), "matmul dst out of bounds");
    // SAFETY: the asserts above prove every element gemm reads or writes lies inside the given
    // slices (operands are addressed only as base + row·row_stride + col·col_stride for rows < m
    // or k and cols < k or n); `dst` is a unique borrow, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0.as_mut_ptr(),
            dst.2 as isize,
            dst.1 as isize,
            accumulate,
            lhs.0.as_ptr(),
            lhs.2 as isize,
            lhs.1 as isize,
            rhs.0.as_ptr(),
            rhs.2 as isize,
            rhs.1 as isize,
            1.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests;
