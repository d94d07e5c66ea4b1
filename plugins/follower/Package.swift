// swift-tools-version:6.0
// The `follower` handler module as its own package (route 1 of docs/platform-facts.md, Loading modules). The root package
// builds the same sources as `libFollower.so` too.
import PackageDescription

let package = Package(
    name: "follower",
    products: [
        .library(name: "Follower", type: .dynamic, targets: ["Follower"]),
    ],
    dependencies: [
        // Only the SDK product, never OpenCombine: a second copy of either breaks every cast
        // between the host and the module.
        .package(path: "../EventBusKit"),
    ],
    targets: [
        .target(name: "Follower", dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]),
    ]
)
