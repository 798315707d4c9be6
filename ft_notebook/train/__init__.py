"""Elastic data-parallel training on Dask (``ft.fit``), built piece by piece.

Here so far: :mod:`._sharding`, the data plan that keeps every sample used exactly
once per epoch whatever happens to the workers.
"""

from __future__ import annotations

from ft_notebook.train._sharding import DataCursor, Shard, advance, epoch_order, sample_rng, shard

__all__ = ["DataCursor", "Shard", "advance", "epoch_order", "sample_rng", "shard"]
