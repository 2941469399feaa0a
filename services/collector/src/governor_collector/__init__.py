"""governor-collector: metric sources publishing samples to Kafka."""
