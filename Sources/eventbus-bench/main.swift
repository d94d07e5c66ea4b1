import Foundation
import SystemCalls
// EventBus benchmarks, each side by side with its anchors measured in the same run.
// Run in release: swift run -c release eventbus-bench [BENCHMARK] [ARGS…]
//   dispatch [deliveries-per-run]   post → N sinks vs raw closures and PassthroughSubject; the
//                                   bus's own operators; then mailbox, timer-jitter, footprint
//   post-cost [events] [sinks] [batch]  the fixed cost of one post: ns and allocations per post
//                                   (callgrind-friendly: see PostCostBenchmark.swift)
//   mailbox [events]                cross-thread delivery into mailboxes vs receive(on:)
//   timer-jitter [seconds]          10 ms timer lateness, quiet and under a CPU hog
//   footprint [subscriptions]       heap bytes per subscription; an idle eventbusd's RSS
//   files [files] [directory]       a storm of file creations: the inotify source vs inotifywait;
//                                   then files-scale
//   storm [files] [directory] [rounds]  the storm of `files` alone (3 rounds unless told)
//   files-reader [files] [directory]  one storm, the source alone with a counting subscriber
//                                   (callgrind-friendly: see FilesBenchmark.swift)
//   files-scale [directory]         per-folder rename and removal at 0/50k/150k watched paths;
//                                   rm -rf of a 100k-file tree (overflows)
//   tail [events]                   events/s through the control socket to `eventbus tail --json`
//   journal [entries]               journal ingest vs a C loop and journalctl; follow latency
//   isolation [events]              delivery into one module in-process vs in a worker process
//   exec [events]                   delivery into a Swift worker module vs exec modules (C, Python)
//   bridge [events] [core|durable]  bus A → NATS → bus B vs a raw nats.c publish → subscribe
//                                   (`core`: only the raw anchor and the core bridge; `durable`:
//                                   only the durable bridge — to profile)
//   resume [core|durable|both] [max_reconnect_wait s]
//                                   seconds from a restarted nats-server accepting clients to
//                                   the next import (outages of 1, 3, 8 s twice, 4 × 0.2 s)
//   metrics [events]                10 modules' delivery with metrics on vs off
//   units PID                       systemd unit events from a container's systemd (PID as seen
//                                   here): start, stop and restart latency vs busctl monitor,
//                                   a 200-restart burst, idle CPU with 500 units
//   dbus [signals]                  signal → subscriber latency of the D-Bus source vs busctl
//                                   monitor on a private dbus-daemon; idle CPU of a running source
//   wide [fields…]                  CPU per event against its field count (1 … 60 000): the
//                                   control socket's JSON and human formats, NATS encode/decode
//   soak [seconds] [posts/s]        the example config under steady load (10 000 posts/s, two
//                                   tails): eventbusd's RSS growth after a 2-minute warm-up
//   devices [rounds]                loop device add → receipt: the devices source vs
//                                   `udevadm monitor --kernel` (root; udevadm from .ci/setup)
//   rules [rounds]                  post cost with 1 000 rules matching nothing vs none; idle CPU
//                                   with 100 rules; file written → a rule's command running vs
//                                   inotifywait | while read running the same command
//   webhook [deliveries] [python]   webhooks through the durable outbox to a local receiver
//                                   (SwiftNIO; `python`: the tests' Python one) vs a curl loop
//   (files and storm take --hog N: N spinning threads in a child process during the storms)
//   hog N                           the CPU hog of --hog, run as a child process
var arguments = Array(CommandLine.arguments.dropFirst())
/// `--hog N`, taken out of the arguments wherever it is.
let hogThreads: Int = {
    guard let flag = arguments.firstIndex(of: "--hog"), flag + 1 < arguments.count, let threads = Int(arguments[flag + 1]) else { return 0 }
    arguments.removeSubrange(flag...(flag + 1))
    return threads
}()
switch arguments.first ?? "dispatch" {
case "dispatch":
    dispatchBenchmark(eventsPerRun: arguments.dropFirst().first.flatMap(Int.init) ?? 2_000_000)
    print()
    mailboxBenchmark(events: 200_000)
    print()
    timerJitterBenchmark(seconds: 5)
    print()
    subscriptionFootprint(count: 100_000)
    idleHostFootprint(idleSeconds: 2)
    print()
    metricsBenchmark(events: 200_000)
case "soak":
    soakBenchmark(seconds: arguments.dropFirst().first.flatMap(Int.init) ?? 600,
                  rate: arguments.dropFirst(2).first.flatMap(Int.init) ?? 10_000)
case "devices":
    devicesBenchmark(rounds: arguments.dropFirst().first.flatMap(Int.init) ?? 200)
case "rules":
    rulesBenchmark(rounds: arguments.dropFirst().first.flatMap(Int.init) ?? 5)
case "metrics":
    metricsBenchmark(events: arguments.dropFirst().first.flatMap(Int.init) ?? 200_000)
case "post-cost":
    let numbers = arguments.dropFirst().map { Int($0) }
    let events: Int = numbers.first.flatMap { $0 } ?? 1_000_000
    let sinks: Int = numbers.dropFirst().first.flatMap { $0 } ?? 1
    let batch: Int = numbers.dropFirst(2).first.flatMap { $0 } ?? 1
    postCostBenchmark(events: events, subscribers: sinks, batch: batch)
case "mailbox":
    mailboxBenchmark(events: arguments.dropFirst().first.flatMap(Int.init) ?? 200_000)
case "timer-jitter":
    timerJitterBenchmark(seconds: arguments.dropFirst().first.flatMap(Double.init) ?? 5)
case "footprint-child":  // the footprint benchmark's measurement, run as a child process
    footprintChild(variant: arguments[1], count: Int(arguments[2])!)
case "footprint":
    subscriptionFootprint(count: arguments.dropFirst().first.flatMap(Int.init) ?? 100_000)
    idleHostFootprint(idleSeconds: 2)
case "files":
    let base = arguments.dropFirst(2).first ?? (System.isAccessible("/dev/shm", .writable) ? "/dev/shm" : "/tmp")
    filesBenchmark(files: arguments.dropFirst().first.flatMap(Int.init) ?? 100_000, base: base, rounds: 3, hog: hogThreads)
    print()
    filesScaleBenchmark(base: base)
case "storm":
    let base = arguments.dropFirst(2).first ?? (System.isAccessible("/dev/shm", .writable) ? "/dev/shm" : "/tmp")
    filesBenchmark(files: arguments.dropFirst().first.flatMap(Int.init) ?? 100_000, base: base,
                   rounds: arguments.dropFirst(3).first.flatMap(Int.init) ?? 3, hog: hogThreads)
case "hog":
    spinForever(threads: arguments.dropFirst().first.flatMap(Int.init) ?? 4)
case "files-reader":
    filesReaderBenchmark(files: arguments.dropFirst().first.flatMap(Int.init) ?? 5_000,
                         base: arguments.dropFirst(2).first ?? (System.isAccessible("/dev/shm", .writable) ? "/dev/shm" : "/tmp"))
case "files-scale":
    filesScaleBenchmark(base: arguments.dropFirst().first ?? (System.isAccessible("/dev/shm", .writable) ? "/dev/shm" : "/tmp"))
case "tail":
    await tailBenchmark(events: arguments.dropFirst().first.flatMap(Int.init) ?? 1_000_000)
case "files-storm":  // the files benchmark's writer, run as a child process
    createStorm(in: arguments[1], count: Int(arguments[2])!)
case "journal":
    JournalBenchmark.run(entries: arguments.dropFirst().first.flatMap(Int.init) ?? 1_000_000)
case "isolation":
    await isolationBenchmark(events: arguments.dropFirst().first.flatMap(Int.init) ?? 1_000_000)
case "exec":
    await execBenchmark(events: arguments.dropFirst().first.flatMap(Int.init) ?? 200_000)
case "bridge":
    BridgeBenchmark.run(events: arguments.dropFirst().first.flatMap(Int.init) ?? 500_000,
                        part: arguments.dropFirst(2).first.flatMap(BridgeBenchmark.Part.init(rawValue:)) ?? .all)
case "resume":
    let seconds: Double? = arguments.count > 2 ? Double(arguments[2]) : nil
    let maxReconnectWait: Duration? = seconds.map { Duration.milliseconds(Int($0 * 1_000)) }
    BridgeResumeBenchmark.run(mode: arguments.count > 1 ? arguments[1] : "both", maxReconnectWait: maxReconnectWait)
case "wide":
    let counts = arguments.dropFirst().compactMap { Int($0) }
    await wideEventBenchmark(fieldCounts: counts.isEmpty ? [1, 100, 1_000, 10_000, 60_000] : counts)
case "webhook":
    await webhookBenchmark(deliveries: arguments.dropFirst().first.flatMap(Int.init) ?? 2_000,
                           python: arguments.dropFirst(2).first == "python")
case "units":
    guard let pid = arguments.dropFirst().first.flatMap(Int32.init) else {
        print("units needs the pid of a container's systemd (docs/benchmarks.md)")
        exit(2)
    }
    UnitsBenchmark.run(containerPID: pid)
case "dbus":
    DBusBenchmark.run(signals: arguments.dropFirst().first.flatMap(Int.init) ?? 1_000)
case "journal-writer":  // the journal benchmark's latency writer, run as a child process
    JournalBenchmark.writer(socket: arguments[1], count: Int(arguments[2])!)
default:
    print("unknown benchmark \(arguments[0]); available: dispatch, soak, devices, rules, metrics, post-cost, mailbox, timer-jitter, footprint, files, storm, hog, files-reader, files-scale, tail, files-storm, journal, isolation, exec, bridge, resume, wide, webhook, units, dbus")
    exit(2)
}
