package sqlq

import "github.com/idemhq/idem/store"

// Tables maps the table names of store.RowEstimator and store.RowCounter
// to the SQL stores' tables (the same in pgstore and sqlitestore).
var Tables = map[string]string{
	store.TableInstances:   "idem_instances",
	store.TableAttributes:  "idem_saga_attributes",
	store.TableInbox:       "idem_inbox",
	store.TableOutbox:      "idem_outbox",
	store.TableTimers:      "idem_timers",
	store.TableJournal:     "idem_journal",
	store.TableDeadLetters: "idem_dead_letters",
	store.TableQueue:       "idem_queue",
	store.TableSchedules:   "idem_schedules",
	store.TableTokens:      "idem_tokens",
}
