"""Replay: what Tidewise would have decided on a history, against what runs today.

Each decision at time t uses only samples with a timestamp before t: the forecasts are refitted
at every UTC midnight on the history before it (as the daily training job does), and each decision
corrects that forecast with the samples between the midnight and t (as the serving loop does
with fresh history). The decisions come from the serving loop's own logic (`autoscaler.logic`).
"""
