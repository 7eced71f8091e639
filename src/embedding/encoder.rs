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
//! Weights are read from `model.safetensors` with candle's loader; nothing here does IO after
//! [`Encoder::load`].

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
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

impl Encoder {
    /// Load `config.json` and `model.safetensors` from `model_dir`.
    pub(crate) fn load(model_dir: &Path) -> Result<Self, Error> {
        let config_path = model_dir.join("config.json");
        let config_text = std::fs::read_to_string(&config_path)
            .map_err(|err| Error::Load { path: config_path.clone(), message: err.to_string() })?;
        let config: BertConfig = serde_json::from_str(&config_text)
            .map_err(|err| Error::Load { path: config_path.clone(), message: err.to_string() })?;
        if config.hidden_act != "gelu" {
            return Err(Error::Load {
                path: config_path,
                message: format!(
                    "unsupported hidden_act {:?} (only exact gelu)",
                    config.hidden_act
                ),
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
        let weights_path = model_dir.join("model.safetensors");
        let tensors = candle_core::safetensors::load(&weights_path, &Device::Cpu)
            .map_err(|err| Error::Load { path: weights_path.clone(), message: err.to_string() })?;
        let mut store = WeightStore { tensors, path: &weights_path };
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

        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for index in 0..config.num_hidden_layers {
            let prefix = format!("encoder.layer.{index}");
            let query = store.linear(&format!("{prefix}.attention.self.query"), hidden, hidden)?;
            let key = store.linear(&format!("{prefix}.attention.self.key"), hidden, hidden)?;
            let value = store.linear(&format!("{prefix}.attention.self.value"), hidden, hidden)?;
            layers.push(Layer {
                qkv: Linear::concat_outputs(&[query, key, value]),
                attention_out: store.linear(
                    &format!("{prefix}.attention.output.dense"),
                    hidden,
                    hidden,
                )?,
                attention_norm: store.layer_norm(
                    &format!("{prefix}.attention.output.LayerNorm"),
                    hidden,
                    eps,
                )?,
                ffn_in: store.linear(
                    &format!("{prefix}.intermediate.dense"),
                    hidden,
                    config.intermediate_size,
                )?,
                ffn_out: store.linear(
                    &format!("{prefix}.output.dense"),
                    config.intermediate_size,
                    hidden,
                )?,
                output_norm: store.layer_norm(
                    &format!("{prefix}.output.LayerNorm"),
                    hidden,
                    eps,
                )?,
            });
        }
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

/// Per sequence: mean over its rows of `states`, then divided by its Euclidean norm (with the
/// 1e-12 floor sentence-transformers' `Normalize` uses).
fn pool_and_normalise(sequences: &[&[u32]], states: &[f32], hidden: usize) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(sequences.len());
    let mut row = 0;
    for ids in sequences {
        let mut sum = vec![0.0f32; hidden];
        for _ in 0..ids.len() {
            for (s, x) in sum.iter_mut().zip(&states[row * hidden..][..hidden]) {
                *s += x;
            }
            row += 1;
        }
        let count = ids.len().max(1) as f32;
        for s in &mut sum {
            *s /= count;
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        for s in &mut sum {
            *s /= norm;
        }
        out.push(sum);
    }
    out
}

fn resize(buffer: &mut Vec<f32>, len: usize) {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
}

fn add_in_place(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

fn softmax_in_place(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for x in row.iter_mut() {
        *x -= max;
    }
    exp_in_place(row);
    let inverse = 1.0 / row.iter().sum::<f32>();
    for x in row.iter_mut() {
        *x *= inverse;
    }
}

/// Exact (erf-based) GELU, `0.5·x·(1 + erf(x/√2))`, as BERT's `hidden_act = "gelu"` specifies.
///
/// This runs on every element of the `[tokens × 1536]` intermediate activations and took a
/// quarter of the encoder's time with libm's scalar `erff`; the branch-free version below lets
/// LLVM vectorise the loop (8 lanes with AVX2, selected at run time).
fn gelu_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked on the line above).
        unsafe { gelu_avx2(values) };
        return;
    }
    gelu_portable(values);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(values: &mut [f32]) {
    gelu_portable(values);
}

#[inline(always)]
fn gelu_portable(values: &mut [f32]) {
    for x in values.iter_mut() {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// `e^x` for every element (same dispatch as [`gelu_in_place`]).
fn exp_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked on the line above).
        unsafe { exp_avx2(values) };
        return;
    }
    exp_portable(values);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exp_avx2(values: &mut [f32]) {
    exp_portable(values);
}

#[inline(always)]
fn exp_portable(values: &mut [f32]) {
    for x in values.iter_mut() {
        *x = exp(*x);
    }
}

/// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), branch-free:
/// `erf(|x|) = 1 − t·(a1 + t·(a2 + t·(a3 + t·(a4 + t·a5))))·e^(−x²)` with `t = 1/(1 + p·|x|)`,
/// sign restored afterwards.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_6;
    const A2: f32 = -0.284_496_74;
    const A3: f32 = 1.421_413_7;
    const A4: f32 = -1.453_152_1;
    const A5: f32 = 1.061_405_4;
    let magnitude = x.abs();
    let t = 1.0 / (1.0 + P * magnitude);
    let polynomial = t * (A1 + t * (A2 + t * (A3 + t * (A4 + t * A5))));
    let value = 1.0 - polynomial * exp(-magnitude * magnitude);
    value.copysign(x)
}

/// `e^x` in single precision without branches: `x = k·ln 2 + r` with integer k and
/// `|r| ≤ ln 2 / 2`, `e^r` by its degree-7 Taylor polynomial (relative error below 1e-8 on
/// that interval), and `2^k` assembled in the exponent bits. Inputs are clamped to
/// [−87, 88], which keeps `2^k` a normal float; `e^−87` is below every value that matters here.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // 1.5·2^23: adding and subtracting it rounds a float of magnitude < 2^22 to an integer.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-87.0, 88.0);
    let k = (x * std::f32::consts::LOG2_E + ROUNDER) - ROUNDER;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let polynomial = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let scale = f32::from_bits(((k as i32 + 127) as u32) << 23);
    polynomial * scale
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

/// Tensors of the safetensors file, taken out one by one and converted to `f32` vectors.
struct WeightStore<'a> {
    tensors: HashMap<String, Tensor>,
    path: &'a Path,
}

impl WeightStore<'_> {
    fn error(&self, message: String) -> Error {
        Error::Load { path: self.path.to_path_buf(), message }
    }

    fn take_tensor(&mut self, name: &str) -> Result<Tensor, Error> {
        self.tensors.remove(name).ok_or_else(|| self.error(format!("missing tensor {name}")))
    }

    fn to_vec(&self, name: &str, tensor: Tensor) -> Result<Vec<f32>, Error> {
        tensor
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|err| self.error(format!("tensor {name}: {err}")))
    }

    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, Error> {
        let tensor = self.take_tensor(name)?;
        if tensor.dims() != shape {
            return Err(self.error(format!(
                "tensor {name} has shape {:?}, expected {shape:?}",
                tensor.dims()
            )));
        }
        self.to_vec(name, tensor)
    }

    fn take_any_rows(&mut self, name: &str, width: usize) -> Result<Vec<f32>, Error> {
        let tensor = self.take_tensor(name)?;
        match tensor.dims() {
            [rows, cols] if *rows >= 1 && *cols == width => self.to_vec(name, tensor),
            dims => {
                Err(self.error(format!("tensor {name} has shape {dims:?}, expected [_, {width}]")))
            }
        }
    }

    fn layer_norm(&mut self, prefix: &str, width: usize, eps: f32) -> Result<LayerNorm, Error> {
        Ok(LayerNorm {
            weight: self.take(&format!("{prefix}.weight"), &[width])?,
            bias: self.take(&format!("{prefix}.bias"), &[width])?,
            eps,
        })
    }

    /// A PyTorch `nn.Linear` (`weight` is `[out × in]`), stored transposed.
    fn linear(&mut self, prefix: &str, n_in: usize, n_out: usize) -> Result<Linear, Error> {
        let weight = self.take(&format!("{prefix}.weight"), &[n_out, n_in])?;
        let bias = self.take(&format!("{prefix}.bias"), &[n_out])?;
        let mut weight_t = vec![0.0; n_in * n_out];
        for out_index in 0..n_out {
            for in_index in 0..n_in {
                weight_t[in_index * n_out + out_index] = weight[out_index * n_in + in_index];
            }
        }
        Ok(Linear { weight_t, bias, n_in, n_out })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|c| a[i * k + c] * b[c * n + j]).sum();
            }
        }
        out
    }

    #[test]
    fn matmul_matches_naive_product_with_strides_and_accumulation() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        let expected = naive(m, n, k, &a, &b);
        let mut out = vec![1.0; m * n];
        matmul(
            MatMul { m, n, k, scale: 2.0, accumulate: true },
            (&a, k, 1),
            (&b, n, 1),
            (&mut out, n, 1),
        );
        for (got, want) in out.iter().zip(&expected) {
            assert!((got - (1.0 + 2.0 * want)).abs() < 1e-5);
        }
        // b given transposed: bt[j][c] = b[c][j], read with swapped strides.
        let mut bt = vec![0.0; n * k];
        for c in 0..k {
            for j in 0..n {
                bt[j * k + c] = b[c * n + j];
            }
        }
        let mut out = vec![0.0; m * n];
        matmul(
            MatMul { m, n, k, scale: 1.0, accumulate: false },
            (&a, k, 1),
            (&bt, 1, k),
            (&mut out, n, 1),
        );
        for (got, want) in out.iter().zip(&expected) {
            assert!((got - want).abs() < 1e-5);
        }
    }

    #[test]
    #[should_panic(expected = "matmul rhs out of bounds")]
    fn matmul_rejects_short_operands() {
        let a = vec![0.0; 6];
        let b = vec![0.0; 5];
        let mut out = vec![0.0; 4];
        matmul(
            MatMul { m: 2, n: 2, k: 3, scale: 1.0, accumulate: false },
            (&a, 3, 1),
            (&b, 2, 1),
            (&mut out, 2, 1),
        );
    }

    #[test]
    fn fast_exp_and_erf_are_accurate() {
        let mut worst_exp: f64 = 0.0;
        let mut worst_erf: f64 = 0.0;
        for step in -8000..=8000 {
            let x = step as f32 * 0.01;
            let exact = f64::from(x).exp();
            worst_exp = worst_exp.max(((f64::from(exp(x)) - exact) / exact).abs());
            let reference = f64::from(libm::erff(x));
            worst_erf = worst_erf.max((f64::from(erf(x)) - reference).abs());
        }
        assert!(worst_exp < 5e-7, "exp relative error {worst_exp}");
        assert!(worst_erf < 3e-7, "erf absolute error {worst_erf}");
        let mut values: Vec<f32> = (0..37).map(|i| i as f32 * 0.3 - 5.0).collect();
        let expected: Vec<f32> = values.iter().map(|x| x.exp()).collect();
        exp_in_place(&mut values);
        for (got, want) in values.iter().zip(&expected) {
            assert!(((got - want) / want).abs() < 5e-7);
        }
    }

    #[test]
    fn softmax_and_layer_norm_and_gelu_match_their_definitions() {
        let mut row = vec![1.0, 2.0, 3.0];
        softmax_in_place(&mut row);
        let denominator: f32 = [1.0f32, 2.0, 3.0].iter().map(|x| x.exp()).sum();
        assert!((row[2] - 3.0f32.exp() / denominator).abs() < 1e-6);

        let norm = LayerNorm { weight: vec![2.0; 4], bias: vec![1.0; 4], eps: 0.0 };
        let mut rows = vec![1.0, 2.0, 3.0, 4.0];
        norm.apply_rows(&mut rows);
        // mean 2.5, variance 1.25
        assert!((rows[0] - (1.0 + 2.0 * (-1.5 / 1.25f32.sqrt()))).abs() < 1e-5);

        let mut values = vec![0.0, 1.0, -1.0];
        gelu_in_place(&mut values);
        assert_eq!(values[0], 0.0);
        assert!((values[1] - 0.841_344_7).abs() < 1e-6);
        assert!((values[2] + 0.158_655_3).abs() < 1e-6);
    }
}
