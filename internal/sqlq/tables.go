package sqlq

import (
	"github.com/idemhq/idem/store/readmodel"
)

// Tables maps the table names of readmodel.RowEstimator and readmodel.RowCounter
// to the SQL stores' tables (the same in pgstore and sqlitestore).
var Tables = map[string]string{
	readmodel.TableInstances:   "idem_instances",
	readmodel.TableAttributes:  "idem_saga_attributes",
	readmodel.TableInbox:       "idem_inbox",
	readmodel.TableOutbox:      "idem_outbox",
	readmodel.TableTimers:      "idem_timers",
	readmodel.TableJournal:     "idem_journal",
	readmodel.TableDeadLetters: "idem_dead_letters",
	readmodel.TableQueue:       "idem_queue",
	readmodel.TableSchedules:   "idem_schedules",
	readmodel.TableTokens:      "idem_tokens",
}
