package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// replayUpstream answers from a cache of a real broker's answers, keyed by the request frame
// without its correlation id (api key, version, client id and body all included).
type replayUpstream struct {
	broker string
	mu     sync.Mutex
	cache  map[string][]byte
	conn   net.Conn
	reader *bufio.Reader
}

func replayMain() {
	fs := flag.NewFlagSet("replay", flag.ExitOnError)
	listen := fs.String("replay-listen", "127.0.0.1:0", "where to accept the proxy's connections")
	broker := fs.String("replay-upstream", "", "the real broker's host:port")
	fs.Parse(os.Args[1:])
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen replay: listen:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	up := &replayUpstream{broker: *broker, cache: map[string][]byte{}}
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen replay: accept:", err)
			os.Exit(1)
		}
		go up.serve(conn)
	}
}

func readFrame(r *bufio.Reader, buf []byte) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if cap(buf) < 4+n {
		buf = make([]byte, 4+n)
	}
	buf = buf[:4+n]
	copy(buf, size[:])
	_, err := io.ReadFull(r, buf[4:])
	return buf, err
}

// answer is the broker's answer to `request` (a whole frame), from the cache or asked once.
func (u *replayUpstream) answer(request []byte) ([]byte, error) {
	// frame: size(4) api_key(2) api_version(2) correlation_id(4) rest...
	key := string(request[4:8]) + string(request[12:])
	u.mu.Lock()
	defer u.mu.Unlock()
	if cached, ok := u.cache[key]; ok {
		return cached, nil
	}
	if u.conn == nil {
		conn, err := net.Dial("tcp", u.broker)
		if err != nil {
			return nil, err
		}
		u.conn, u.reader = conn, bufio.NewReader(conn)
	}
	if _, err := u.conn.Write(request); err != nil {
		return nil, err
	}
	answer, err := readFrame(u.reader, nil)
	if err != nil {
		return nil, err
	}
	u.cache[key] = answer
	return answer, nil
}

func (u *replayUpstream) serve(conn net.Conn) {
	defer conn.Close()
	reader := bufio.NewReaderSize(conn, 1<<16)
	writer := bufio.NewWriterSize(conn, 1<<16)
	var buf []byte
	for {
		request, err := readFrame(reader, buf)
		if err != nil {
			return
		}
		buf = request
		if len(request) < 12 {
			return
		}
		cached, err := u.answer(request)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen replay: broker:", err)
			return
		}
		// the answer with this request's correlation id (answer frame: size(4) correlation_id(4))
		writer.Write(cached[:4])
		writer.Write(request[8:12])
		writer.Write(cached[8:])
		if reader.Buffered() == 0 {
			if err := writer.Flush(); err != nil {
				return
			}
		}
	}
}
