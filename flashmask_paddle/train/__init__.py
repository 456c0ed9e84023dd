"""Training recipes on PaddleNLP with packed rows and column-wise FlashMask masks.

Pieces (each its own module, importable on their own; paddle/paddlenlp load lazily):

* ``config``      -- typed YAML recipes: ``load_config(path, overrides)`` -> ``RecipeConfig``
* ``cli``         -- ``flashmask-train RECIPE.yaml [key=value ...]`` / ``python -m flashmask_paddle.train``;
                     ``TASKS`` registry: sft, lora -> ``sft.run``; dpo -> ``dpo.run``; rm -> ``rm.run``
* ``tokenizer``   -- ``get_tokenizer(model_cfg, texts)``: local model's or a cached SentencePiece
* ``modeling``    -- ``build_model(model_cfg, tokenizer, seed)``: Llama / Qwen2 (local dir or random init)
* ``integration`` -- ``enable_flashmask(kind)`` / ``flashmask_enabled(kind)``: PaddleNLP attention
                     through our op (``flashmask``) or an explicit N x N mask (``dense``)
* ``packing``     -- first-fit-decreasing packing of documents into rows with position ids, labels,
                     ``startend_row_indices`` and per-row document boundaries
* ``sft``         -- SFT and LoRA through ``paddlenlp.trl.SFTTrainer`` and ``paddlenlp.peft``
"""
