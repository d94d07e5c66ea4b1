// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "EventBus",
    products: [
        .executable(name: "eventbus-bench", targets: ["eventbus-bench"]),
    ],
    dependencies: [
        // The SDK is a nested package so SwiftPM links everything here against its one dynamic
        // library instead of static copies (DESIGN.md §3).
        .package(path: "plugins/EventBusKit"),
    ],
    targets: [
        .executableTarget(
            name: "eventbus-bench",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]
        ),
        .testTarget(
            name: "EventBusKitTests",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]
        ),
    ]
)
