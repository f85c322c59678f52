"""Design-space exploration: models x hardware points, run locally or on Dask, with the paper's figures."""
