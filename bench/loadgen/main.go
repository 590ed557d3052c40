// loadgen keeps a fixed number of Kafka requests in flight on many connections and counts
// the answer frames, spending as little CPU per answer as a client can: the load generator of
// bench/workers_scaling.py (--client go), so that on a small machine the proxy, not the
// client, is the hop that runs out of CPU.
//
//	loadgen -addr 127.0.0.1:9092 -request FILE -connections 16 -depth 32 -warmup 1s -seconds 10
//
// FILE holds one encoded request frame (size prefix included); every answer frame read is
// answered with one more copy of it. Prints one JSON line: {"answers": N, "seconds": S}.
//
//	loadgen -replay-listen 127.0.0.1:P -replay-upstream BROKER
//
// runs the benchmark's upstream instead: a broker stand-in that forwards the first request of
// each kind (the frame past its correlation id) to the real broker BROKER and then answers every
// identical request with that broker's answer, its correlation id patched. It costs a few µs
// per answer, so the proxy in front of it is the hop that runs out of CPU.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-replay-listen" {
		replayMain()
		return
	}
	addr := flag.String("addr", "127.0.0.1:9092", "host:port to load")
	requestFile := flag.String("request", "", "file with one encoded request frame")
	connections := flag.Int("connections", 16, "connections")
	depth := flag.Int("depth", 32, "requests in flight per connection")
	warmup := flag.Duration("warmup", time.Second, "answers in this first period are not counted")
	seconds := flag.Float64("seconds", 10, "counted period, in seconds")
	flag.Parse()

	request, err := os.ReadFile(*requestFile)
	if err != nil || len(request) < 4 {
		fmt.Fprintln(os.Stderr, "loadgen: -request must name a file with one request frame:", err)
		os.Exit(2)
	}
	var counting atomic.Bool
	var answers atomic.Int64
	stop := make(chan struct{})
	var failed atomic.Value
	for i := 0; i < *connections; i++ {
		conn, err := net.Dial("tcp", *addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen: connect:", err)
			os.Exit(1)
		}
		go func(conn net.Conn) {
			defer conn.Close()
			if err := run(conn, request, *depth, &counting, &answers, stop); err != nil {
				failed.Store(err.Error())
			}
		}(conn)
	}
	time.Sleep(*warmup)
	counting.Store(true)
	start := time.Now()
	time.Sleep(time.Duration(*seconds * float64(time.Second)))
	counting.Store(false)
	elapsed := time.Since(start).Seconds()
	counted := answers.Load()
	close(stop)
	if msg, ok := failed.Load().(string); ok {
		fmt.Fprintln(os.Stderr, "loadgen: a connection failed:", msg)
		os.Exit(1)
	}
	out, _ := json.Marshal(map[string]any{"answers": counted, "seconds": elapsed})
	fmt.Println(string(out))
}

// run pipelines `depth` requests, then sends one more for every answer frame until stop.
func run(conn net.Conn, request []byte, depth int, counting *atomic.Bool, answers *atomic.Int64, stop chan struct{}) error {
	batch := make([]byte, 0, len(request)*depth)
	for i := 0; i < depth; i++ {
		batch = append(batch, request...)
	}
	if _, err := conn.Write(batch); err != nil {
		return err
	}
	reader := bufio.NewReaderSize(conn, 1<<16)
	var size [4]byte
	body := make([]byte, 0, 1<<16)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		// answer frames that are already buffered are answered in one write
		frames := 0
		for {
			if _, err := io.ReadFull(reader, size[:]); err != nil {
				return closedOrStopped(err, stop)
			}
			n := int(binary.BigEndian.Uint32(size[:]))
			if cap(body) < n {
				body = make([]byte, n)
			}
			if _, err := io.ReadFull(reader, body[:n]); err != nil {
				return closedOrStopped(err, stop)
			}
			frames++
			if reader.Buffered() < 4 {
				break
			}
		}
		if counting.Load() {
			answers.Add(int64(frames))
		}
		if _, err := conn.Write(batch[:len(request)*frames]); err != nil {
			return closedOrStopped(err, stop)
		}
	}
}

func closedOrStopped(err error, stop chan struct{}) error {
	select {
	case <-stop:
		return nil
	default:
		return err
	}
}
