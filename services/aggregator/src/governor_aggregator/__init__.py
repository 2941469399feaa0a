"""governor-aggregator: faust-streaming windowed aggregation of samples into load windows"""
