"""OR-Tools CP-SAT: the whole-graph model, its cuts, the staged solve and the bottleneck segments."""
