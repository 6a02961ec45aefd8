"""The experiment tooling behind sweep.py and plot.py, one job per module:

    settings   every setting of a sweep (default, range, ./train or ./eval flag, help) and the presets
    flag_table ./train's and ./eval's tables of flags (-flags_json 1): ranges, choices, defaults
    grid       the grid of runs and their names; InputError
    checks     the checks of the settings before anything is written or started
    runner     ./train and ./eval per run: subprocesses, --gpus, Slurm job arrays
    files      every file written whole; no output that is an input or a run folder's file
    collect    the run folders into results.csv, layers.csv and init_layers.csv
    results    load(PATH): a run or a sweep as pandas DataFrames (the one way in)
    stats      the statistics: Fisher, sign test, Welch, Spearman, AICc law fits, LR sensitivity,
               estimates within cells, Firth's logistic dose-response
    tables     what the reports share: the grid joined to the results, labels, number formats
    summary    results.md, every sweep's table
    e1, e2, e3 one report module per experiment (docs/protocol.md)
    reports    writes a sweep's reports and figures, and publishes them
    figures    the sweep's figures (matplotlib)
    intervene  claim 4's intervention: checkpoints with their branch outputs scaled, evaluated again
    primary    the primary tests of the claims, within cells, and the rules that join their parts
    claim_rows one function per claim of the paper: its row of the claims table and its verdict
    claims     the claims table of docs/claims.md and README.md
    findings   README's *What the runs found*, from the published tables
    power      each primary test's power, simulated before the runs; pilot, the numbers it starts from
    cli        sweep.py's command line
    python     the interpreter check: restart under /usr/bin/python3 when numpy etc. are missing

This file imports nothing, so that python.require() can run before numpy is imported.
"""
