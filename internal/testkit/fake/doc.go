// Package fake holds stateful in-memory stand-ins for the narrow AWS and GitHub interfaces the
// use cases own (pkg/steps/provision, pkg/steps/release, pkg/refresh, pkg/pool), so that their
// orchestration is tested under `go test -short`, with no emulator and no root.
//
// Each fake keeps its state in memory behind a mutex, records its calls (Calls), takes errors
// to return from its next calls of one operation (Inject), and forgets everything with Reset.
// Store honours the conditional writes of pkg/contract/state's Store (store_contract_test.go runs one
// table of transitions against both); EC2 launches fleets with injectable capacity shortages;
// SQS is a queue good enough for the real offers.Selector, Queue and Directory; SSM holds the pool
// documents the real pooldoc.Loader reads; Agent plays an instance agent's part on the Store.
package fake
