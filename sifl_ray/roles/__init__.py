"""The parties of a round (client workers, aggregator shards, server, evaluator) as plain classes, hosted
by a Ray actor or called in-process by the sequential backend."""
