// swift-tools-version:6.0
// The EventBus SDK: the only package that links OpenCombine, built as one dynamic library so the
// host and every handler module share a single copy of its types (see docs/platform-facts.md, Loading modules: a second,
// static copy makes every `as?` across the module boundary fail silently).
import PackageDescription

let package = Package(
    name: "EventBusKit",
    products: [
        .library(name: "EventBusKit", type: .dynamic, targets: ["EventBusKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/OpenCombine/OpenCombine", exact: "0.14.0"),
    ],
    targets: [
        .target(
            name: "EventBusKit",
            dependencies: [
                .product(name: "OpenCombine", package: "OpenCombine"),
                .product(name: "OpenCombineDispatch", package: "OpenCombine"),
            ],
            plugins: ["SDKFingerprint"]
        ),
        // `ModuleABI.interfaceFingerprint`: a SHA-256 of this package's sources and manifest,
        // generated at build time, compiled into every module and compared by the host, so a
        // module built against any other SDK is refused with no version to bump by hand.
        .plugin(name: "SDKFingerprint", capability: .buildTool(), dependencies: ["SDKFingerprintTool"]),
        .executableTarget(name: "SDKFingerprintTool"),
    ]
)
