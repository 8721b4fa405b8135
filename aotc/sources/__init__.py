"""Where a model comes from: a model file (model_file), a Hugging Face folder (hf_folder),
and the weights a checkpoint holds (checkpoint)."""
