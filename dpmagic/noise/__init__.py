"""Sensitivities from the neighbouring relation, and noise calibrated to a cost with OpenDP's exact samplers."""
