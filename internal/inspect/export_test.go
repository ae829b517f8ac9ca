package inspect

// SetTimerScan lowers the bound of Timers' scans for one test, so that a
// test goes beyond it with a few hundred timers.
func SetTimerScan(n int) (restore func()) {
	old := timerScan
	timerScan = n
	return func() { timerScan = old }
}
