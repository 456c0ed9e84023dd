"""``python -m flashmask_paddle.train RECIPE.yaml [key=value ...]`` (same as ``flashmask-train``)."""
import sys

from .cli import main

sys.exit(main())
