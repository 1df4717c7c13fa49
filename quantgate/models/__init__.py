"""The network definitions the pipeline trains and exports: the built-in CNNs, paddle.vision's classifiers
and the CRNN text recognizer. The train stage builds and trains them; export rebuilds them from the master
weights.
"""
