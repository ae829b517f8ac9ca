package rabbitmq

// SetConsumeHook makes t call hook before it starts the consumer of each
// partition queue; call it before the first Receive.
func SetConsumeHook(t *Transport, hook func(part int)) { t.consumeHook = hook }
