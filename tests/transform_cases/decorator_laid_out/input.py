class Saver:
    """Saves checkpoints."""

    def save_distributed_checkpoint_to_storage(self, iteration, storage_path):
        """Save one checkpoint."""
        return iteration, storage_path

    def load(self, iteration):
        """Load one checkpoint."""
        return iteration
