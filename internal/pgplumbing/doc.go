// Package pgplumbing is the one home of what every package of this module that
// talks to PostgreSQL needs to agree on: whether a request was applied, not
// applied, or has an unknown outcome ([Classify]); what a refusal says is
// wrong with the setup, by its exact SQLSTATE, and what to change
// ([ProblemOf], [Problem.Hint], [PoolerHint]); and which names are valid
// identifiers and how they are quoted ([CheckIdent], [Quote]).
//
// backends/postgres, fence and leasequeue use it and keep no copy of their
// own; they only choose the words of their errors. Migrations are run by the
// sibling package pgmigrate.
//
// The classification reads only what the server and pgconn state without
// translation: the SQLSTATE (Code), the untranslated severity
// (SeverityUnlocalized, sent by PostgreSQL 9.6 and later) and
// pgconn.SafeToRetry. It never reads a message or the translated Severity,
// which follow the server's lc_messages.
package pgplumbing
