// Command pricefake serves the test bed's stand-in for the AWS Price List API (package
// pricefake, its Default prices) on an address: make testbed-up starts it and points
// AWS_ENDPOINT_URL_PRICING at it.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/pricefake"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:1339", "address to serve on")
	flag.Parse()
	srv := &http.Server{Addr: *addr, Handler: pricefake.Handler(pricefake.Default), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "pricefake:", err)
		os.Exit(1)
	}
}
