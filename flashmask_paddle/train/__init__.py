"""Training recipes on PaddleNLP with packed rows and column-wise FlashMask masks.

One job per module (paddle/paddlenlp load lazily; ``packing`` and ``preference`` need only numpy):

* configuration -- ``config``: typed YAML recipes, ``load_config(path, overrides)`` -> ``RecipeConfig``,
  the ``TASKS`` registry (task -> runner); ``paddlenlp_args``: PaddleNLP's JSON argument files
  (``run_finetune.py``, ``run_dpo.py``, ``run_reward.py``) mapped onto a recipe
* command line  -- ``cli``: ``flashmask-train RECIPE.yaml|CONFIG.json [key=value ...]``
* data          -- ``data``: a recipe's files -> tokenizer, packed datasets and statistics;
  ``packing``: documents -> rows (first-fit decreasing) with ``startend_row_indices``;
  ``preference``: prompts with ranked answers -> rows under the share-question mask;
  ``dataset``: rows as a ``paddle.io.Dataset`` and the collators; ``tokenizer``: the model's own or
  a cached SentencePiece one
* models        -- ``modeling``: Llama / Qwen2 (local dir or random init); ``integration``: PaddleNLP's
  attention through our op (``flashmask``) or an explicit N x N mask (``dense``)
* trainers      -- ``packed_trainer``: the mixin every trainer on packed rows uses; ``sft`` (SFT and
  LoRA, with ``lora``: adapters and their merge), ``dpo``, ``rm``: one module per task
* the run       -- ``runner``: resume, train, save, evaluate, summary, logs and curves
"""
