"""History sources: one interface (`HistorySource.fetch`), three implementations."""
