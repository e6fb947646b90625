"""gpuaccept where the fleet is scheduled by Kubernetes.

- :mod:`~gpuaccept.scaleout.k8s.manifests`: the Jobs (one per node, and an Indexed Job for the inter-node
  all-reduce), the ConfigMap and the Service, as documents (pure);
- :mod:`~gpuaccept.scaleout.k8s.nodes`: ``--k8s-cordon``/``--k8s-resume``: kubectl cordon, taint, label,
  drain and uncordon, by gpuaccept.scaleout.quarantine's rules (shared with the Slurm step);
- :mod:`~gpuaccept.scaleout.k8s.allreduce`: the Indexed Job's rank documents judged into the merged report (the
  Slurm launcher's rule, gpuaccept.scaleout.slurm_allreduce.judge_collective);
- ``python -m gpuaccept.scaleout.k8s manifests|merge|rank``: :mod:`~gpuaccept.scaleout.k8s.__main__`.

Generated and validated here (kubernetes-validate, the Kubernetes releases named in docs/kubernetes.md); not
run against a live cluster in this project's tests.
"""
