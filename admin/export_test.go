package admin

import "time"

// SetClock makes s read the time from now for its sessions and its
// limit of failed logins.
func SetClock(s *Server, now func() time.Time) { s.sessions.now = now }

// SetMaxClients bounds the client addresses s's limit of failed logins
// remembers.
func SetMaxClients(s *Server, n int) { s.sessions.limit.max = n }
