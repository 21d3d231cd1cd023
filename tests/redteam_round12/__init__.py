"""Red-team round twelve: parser differentials at the model gateway."""
