"""What Tidewise saved, priced as a market (`tidewise report --cost PRICES.yaml`, issue 17 item 3).

Batch buys idle night capacity cheaply and online pays for its peak: every core-hour and GiB-hour
is priced at the peak or off-peak price of the hour it falls in. `prices` reads and checks the
prices file, `inputs` reads what the levers are measured from (history, cluster state, replay and
simulator outputs), `ledger` prices them (pure), `page` writes the HTML page and the tables.
"""
