"""The models: loading and caching (:mod:`.loading`), one model's runtime with its KV cache (:mod:`.lm`) and a Llama
target's forward (:mod:`.decoder`), the linear layers' kernel by rows (:mod:`.kernels`, ``csrc/``), the
hot-vocabulary LM head (:mod:`.hotvocab`), the draft on the int8 draft engine's arithmetic (:mod:`.int8draft`) and
the Shakespeare corpus (:mod:`.corpus`).

torch and transformers are imported where they are used, so that importing any module here needs neither."""
