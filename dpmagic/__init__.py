"""dpmagic."""
