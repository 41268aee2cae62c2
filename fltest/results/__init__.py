"""Results: per-run recording, the experiment comparison, the table and the plot."""
