package kvstore

// SetLimitForTest disables or changes the client-side size check so tests
// can reach the server's own limit.
func SetLimitForTest(s *Store, n int) { s.limit = n }
