"""The test harness of the kernels, shared by the CPU tests (through the Paddle op), the GPU tests
(through the torch binding), ``tools/device/sanitize_case.py`` and ``python -m flashmask_paddle.fuzz``.

- ``cases``: the ``Case`` type, the (causal, C) forms, random valid bounds, random cases.
- ``tolerance``: the fp64 reference of a case and the two ways results are compared with it.
- ``paddle_op``: inputs and one call of ``flashmask_paddle.flashmask_attention`` (needs paddle).
- ``torch_binding``: inputs and one call of ``flashmask_paddle.torch`` with NaN-poisoned outputs
  (needs torch).

``cases`` and ``tolerance`` are numpy only.
"""
