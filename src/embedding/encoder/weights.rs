//! Reading `model.safetensors` one tensor at a time.
//!
//! The safetensors crate parses and validates the header ([`Metadata`]); each tensor's bytes are
//! then read from the file straight into its `f32` vector. Its own readers (and candle's) need
//! the whole file in memory or mapped, which put the 88 MB file and its 88 MB `f32` copy in
//! memory at once: the peak of a run that loads the local embedder.

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use safetensors::Dtype;
use safetensors::tensor::Metadata;

use super::{BertConfig, Error, Layer, LayerNorm, Linear};

/// Bytes of the little-endian header length that starts a safetensors file.
const HEADER_LEN_BYTES: usize = 8;
/// The largest header read (the safetensors crate's own limit is 100 MB).
const MAX_HEADER_BYTES: usize = 100_000_000;

/// The tensors of a safetensors file, read one by one and converted to `f32` vectors.
pub(super) struct WeightStore<'a> {
    file: File,
    metadata: Metadata,
    /// File offset of the data section (tensor offsets are relative to it).
    data_start: u64,
    path: &'a Path,
}

impl<'a> WeightStore<'a> {
    /// Open `path` and read its header.
    pub(super) fn open(path: &'a Path) -> Result<Self, Error> {
        let load = |message: String| Error::Load { path: path.to_path_buf(), message };
        let file = File::open(path).map_err(|err| load(err.to_string()))?;
        let mut len = [0_u8; HEADER_LEN_BYTES];
        file.read_exact_at(&mut len, 0).map_err(|err| load(format!("header length: {err}")))?;
        let header_len = usize::try_from(u64::from_le_bytes(len))
            .ok()
            .filter(|&n| n <= MAX_HEADER_BYTES)
            .ok_or_else(|| load("header length out of range".to_owned()))?;
        let mut header = vec![0_u8; header_len];
        file.read_exact_at(&mut header, HEADER_LEN_BYTES as u64)
            .map_err(|err| load(format!("header: {err}")))?;
        let metadata: Metadata =
            serde_json::from_slice(&header).map_err(|err| load(format!("header: {err}")))?;
        let data_start = (HEADER_LEN_BYTES + header_len) as u64;
        let file_len = file.metadata().map_err(|err| load(err.to_string()))?.len();
        if data_start + metadata.data_len() as u64 > file_len {
            return Err(load(format!(
                "file is {file_len} bytes, its header describes {} (truncated download?)",
                data_start + metadata.data_len() as u64
            )));
        }
        Ok(Self { file, metadata, data_start, path })
    }

    /// One encoder layer under `prefix` (`encoder.layer.N`): fused QKV, attention output, FFN.
    pub(super) fn layer(
        &mut self,
        prefix: &str,
        config: &BertConfig,
        eps: f32,
    ) -> Result<Layer, Error> {
        let hidden = config.hidden_size;
        let query = self.linear(&format!("{prefix}.attention.self.query"), hidden, hidden)?;
        let key = self.linear(&format!("{prefix}.attention.self.key"), hidden, hidden)?;
        let value = self.linear(&format!("{prefix}.attention.self.value"), hidden, hidden)?;
        Ok(Layer {
            qkv: Linear::concat_outputs(&[query, key, value]),
            attention_out: self.linear(
                &format!("{prefix}.attention.output.dense"),
                hidden,
                hidden,
            )?,
            attention_norm: self.layer_norm(
                &format!("{prefix}.attention.output.LayerNorm"),
                hidden,
                eps,
            )?,
            ffn_in: self.linear(
                &format!("{prefix}.intermediate.dense"),
                hidden,
                config.intermediate_size,
            )?,
            ffn_out: self.linear(
                &format!("{prefix}.output.dense"),
                config.intermediate_size,
                hidden,
            )?,
            output_norm: self.layer_norm(&format!("{prefix}.output.LayerNorm"), hidden, eps)?,
        })
    }

    fn error(&self, message: String) -> Error {
        Error::Load { path: self.path.to_path_buf(), message }
    }

    /// The tensor `name` as its shape and `f32` values (F32, F16 and BF16 files).
    fn take_tensor(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), Error> {
        let info =
            self.metadata.info(name).ok_or_else(|| self.error(format!("missing tensor {name}")))?;
        let (begin, end) = info.data_offsets;
        let mut bytes = vec![0_u8; end - begin];
        self.file
            .read_exact_at(&mut bytes, self.data_start + begin as u64)
            .map_err(|err| self.error(format!("tensor {name}: {err}")))?;
        let values = match info.dtype {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => return Err(self.error(format!("tensor {name}: unsupported dtype {other:?}"))),
        };
        Ok((info.shape.clone(), values))
    }

    pub(super) fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, Error> {
        let (dims, values) = self.take_tensor(name)?;
        if dims != shape {
            return Err(self.error(format!("tensor {name} has shape {dims:?}, expected {shape:?}")));
        }
        Ok(values)
    }

    pub(super) fn take_any_rows(&mut self, name: &str, width: usize) -> Result<Vec<f32>, Error> {
        let (dims, values) = self.take_tensor(name)?;
        match dims.as_slice() {
            [rows, cols] if *rows >= 1 && *cols == width => Ok(values),
            dims => {
                Err(self.error(format!("tensor {name} has shape {dims:?}, expected [_, {width}]")))
            }
        }
    }

    pub(super) fn layer_norm(
        &mut self,
        prefix: &str,
        width: usize,
        eps: f32,
    ) -> Result<LayerNorm, Error> {
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
mod tests {
    use safetensors::tensor::TensorView;

    use super::*;

    fn write(dir: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> std::path::PathBuf {
        let views = tensors.iter().map(|(name, dtype, shape, bytes)| {
            (*name, TensorView::new(*dtype, shape.clone(), bytes).expect("a consistent view"))
        });
        let bytes = safetensors::serialize(views, None).expect("serialised");
        let path = dir.join("model.safetensors");
        std::fs::write(&path, bytes).expect("written");
        path
    }

    #[test]
    fn tensors_are_read_one_by_one_in_f32_from_f32_and_f16() {
        let dir = tempfile::tempdir().expect("temp dir");
        let weights: Vec<f32> = vec![1.5, -2.0, 0.25, 8.0, -0.5, 3.0];
        let f32_bytes: Vec<u8> = weights.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f16_bytes: Vec<u8> =
            weights[..2].iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        let path = write(
            dir.path(),
            &[("w", Dtype::F32, vec![2, 3], f32_bytes), ("b", Dtype::F16, vec![2], f16_bytes)],
        );
        let mut store = WeightStore::open(&path).expect("opened");
        assert_eq!(store.take("w", &[2, 3]).expect("w"), weights);
        assert_eq!(store.take("b", &[2]).expect("b"), vec![1.5, -2.0]);
        assert_eq!(store.take_any_rows("w", 3).expect("rows"), weights);
        let wrong = store.take("w", &[3, 2]).expect_err("wrong shape").to_string();
        assert!(wrong.contains("expected [3, 2]"), "{wrong}");
        let missing = store.take("nope", &[1]).expect_err("missing").to_string();
        assert!(missing.contains("missing tensor nope"), "{missing}");
    }

    #[test]
    fn a_truncated_file_is_refused_at_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bytes: Vec<u8> = (0..64_u8).collect();
        let path = write(dir.path(), &[("w", Dtype::F32, vec![16], bytes)]);
        let full = std::fs::read(&path).expect("read");
        std::fs::write(&path, &full[..full.len() - 4]).expect("cut");
        let Err(error) = WeightStore::open(&path) else { panic!("a truncated file opened") };
        assert!(error.to_string().contains("truncated download"), "{error}");
    }
}
