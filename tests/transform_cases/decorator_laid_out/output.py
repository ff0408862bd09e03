import megatron.otel as _otel


class Saver:
    """Saves checkpoints."""

    @_otel.traced(
        "demo.checkpointing.save_distributed_checkpoint",
        {"demo.checkpoint.iteration": "iteration", "demo.checkpoint.storage_path": "storage_path"},
    )
    def save_distributed_checkpoint_to_storage(self, iteration, storage_path):
        """Save one checkpoint."""
        return iteration, storage_path

    @_otel.traced("demo.checkpointing.load", {"demo.iteration": "iteration"})
    def load(self, iteration):
        """Load one checkpoint."""
        return iteration
