import EventBusKit

/// The host's device sources: what makes `bus.devices(subsystem:devtype:tag:)` work.
public enum DeviceSources {
    public struct Configuration: Sendable {
        /// The netlink socket's receive buffer in bytes (set with `SO_RCVBUFFORCE`, so as root
        /// it may exceed `net.core.rmem_max`); nil: libsystemd's default, 128 MiB. Past it the
        /// kernel drops messages and the watch announces a `devices.gap` and rescans; tests make
        /// it small to force that.
        public var receiveBufferSize: Int?
        /// The file whose existence says udevd runs, for ``DeviceLayerChoice/automatic``: its
        /// control socket, as libudev and libsystemd test it.
        public var udevControlPath: String

        public init(receiveBufferSize: Int? = nil, udevControlPath: String = "/run/udev/control") {
            self.receiveBufferSize = receiveBufferSize
            self.udevControlPath = udevControlPath
        }
    }

    /// Registers the `devices` source kind on `bus`: one ``DeviceSource`` (one netlink monitor
    /// and its thread) per distinct ``DeviceWatch``. The host calls this once at start-up; a
    /// plain `Bus()` has no device sources.
    public static func register(on bus: Bus, configuration: Configuration = Configuration()) {
        bus.registerSource(DeviceWatch.self) { options, id in
            // The bus calls a driver only with options of the kind it was registered for.
            DeviceSource(id: id, watch: options as! DeviceWatch, configuration: configuration)
        }
    }
}
