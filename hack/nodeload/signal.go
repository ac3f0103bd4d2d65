package main

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// atExit holds what an interrupted run undoes (the gateway, the nodes'
// process, the temporary directory, a series' running child), last
// registered first, when SIGINT or SIGTERM arrives; the tool then exits
// 130. A run that ends normally undoes them through its own defers.
var atExit struct {
	sync.Mutex
	fs []func()
}

// onSignal registers f to run if the tool is interrupted.
func onSignal(f func()) {
	atExit.Lock()
	defer atExit.Unlock()
	atExit.fs = append(atExit.fs, f)
}

// handleSignals starts the goroutine that runs the registered functions
// on SIGINT or SIGTERM and exits.
func handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ch
		atExit.Lock()
		for i := len(atExit.fs) - 1; i >= 0; i-- {
			atExit.fs[i]()
		}
		os.Exit(130)
	}()
}
