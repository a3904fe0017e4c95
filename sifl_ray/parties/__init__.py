"""The parties: one module per party, its logic and the host that runs it in a process of its own.

- :mod:`~sifl_ray.parties.server`: key 1, step 4 (:class:`~sifl_ray.parties.server.ServerHost`);
- :mod:`~sifl_ray.parties.aggregator`: key 2, step 3, SecAgg's server
  (:class:`~sifl_ray.parties.aggregator.AggregatorHost`);
- :mod:`~sifl_ray.parties.workers`: the virtual clients of one worker, step 2
  (:class:`~sifl_ray.parties.workers.WorkerHost`), their uploads as a pipeline
  (:mod:`~sifl_ray.parties.upload`), the in-run audit's part (:mod:`~sifl_ray.parties.canaries`);
- :mod:`~sifl_ray.parties.evaluator`: the simulation's labelled device that decodes to test
  (:class:`~sifl_ray.parties.evaluator.EvaluatorHost`);
- :mod:`~sifl_ray.parties.secure`: secure aggregation's halves at the workers and the aggregator;
- :mod:`~sifl_ray.parties.messages`: what they send each other and the driver;
- :mod:`~sifl_ray.parties.checks`: what is checked before anything is added up;
- :mod:`~sifl_ray.parties.handle`: how the driver calls a party (one typed handle);
- :mod:`~sifl_ray.parties.process`: what every host answers, and its process's settings;
- :mod:`~sifl_ray.parties.key_holdings`: which key material an object holds (no party holds another's).

A host's constructor is the trust boundary (docs/method.md "Parties"): it receives only its own party's key
material, and makes its secrets from its own seeds. The same hosts run as Ray actors and in-process
(:mod:`sifl_ray.backends`). Nothing is imported here: a party's process imports only its own module.
"""
