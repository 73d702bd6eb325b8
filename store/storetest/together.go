package storetest

import "sync"

// Together runs f(0) to f(n-1) in n goroutines released at once, so that
// they race, and returns once all have returned.
func Together(n int, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}
