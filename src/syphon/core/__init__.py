"""Pure code: backlog naming, the envelope, partition keys, typed properties, TimeSpan
ticks, the size bound, the schemas and vocabularies, the typed config and the errors.
Imports no client, no storage library and starts nothing."""
