// Command kfakeserver runs franz-go's fake Kafka cluster (kfake) in a
// process of its own on loopback, so that scripts/test can run idem
// torture on the Kafka transport: no Kafka broker can be installed where
// the tests run. kfake speaks Kafka's protocol and keeps everything in
// memory; it is not Kafka, and what it proves is the transport's and the
// engine's side (docs/transport-kafka.md, "What kfake stands in for").
//
//	kfakeserver -port 39092
//
// prints the transport's URL (kafka://127.0.0.1:39092) once the cluster
// listens, and runs until SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 0, "the broker's port on 127.0.0.1 (0: a free one)")
	flag.Parse()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second)}
	if *port != 0 {
		opts = append(opts, kfake.Ports(*port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakeserver:", err)
		os.Exit(1)
	}
	defer c.Close()
	fmt.Println("kafka://" + c.ListenAddrs()[0])
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
}
