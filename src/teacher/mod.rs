//! The masked-diffusion teacher: an HF Llama checkpoint run bidirectionally (CPU, candle-core).
