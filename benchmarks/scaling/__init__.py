"""benchmarks/scaling_policies.md from experiments to prose, one stage a module.

* :mod:`benchmarks.scaling.experiments`: what is run, as data: each table's ``python -m nlgsim run
  --protocol ...`` arguments, under a typed key;
* :mod:`benchmarks.scaling.runner`: runs them and writes numbers only (benchmarks/results/scaling_policies.json);
* :mod:`benchmarks.scaling.analysis`: pure functions from those numbers to the report's values;
* :mod:`benchmarks.scaling.render`: fills ``report_template.md``, whose numbers are all placeholders,
  and draws the figures through :mod:`nlgsim.plots`.

``python -m benchmarks.scaling`` runs everything (``--only KEY ...``: those experiments, keeping the
others' numbers) and renders; ``python -m benchmarks.scaling.render`` re-renders from the committed results.
"""
