// swift-tools-version:6.0
// The `unit-alerts` handler module as its own package (route 1 of docs/platform-facts.md, Loading
// modules). The root package builds the same sources as `libUnitAlerts.so` too.
import PackageDescription

let package = Package(
    name: "unit-alerts",
    products: [
        .library(name: "UnitAlerts", type: .dynamic, targets: ["UnitAlerts"]),
    ],
    dependencies: [
        // Only the SDK product, never OpenCombine: a second copy of either breaks every cast
        // between the host and the module.
        .package(path: "../EventBusKit"),
    ],
    targets: [
        .target(name: "UnitAlerts", dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]),
    ]
)
