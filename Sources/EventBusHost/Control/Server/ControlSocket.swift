/// Whether and how a ``BusHost`` serves the control socket.
public enum ControlSocket: Sendable, Equatable {
    /// No control socket (hosts embedded in tests and tools).
    case none
    /// Bind the socket the config's `control.socket` names (or the default path), with the
    /// config's mode and group.
    case configured
    /// Accept on this listening Unix stream socket, which systemd opened and passed (socket
    /// activation). The host owns it from then on; its path, mode and group are the socket
    /// unit's (`ListenStream=`, `SocketMode=`, `SocketGroup=`); the config's groups still decide
    /// who may tail and post. `path`, where the socket unit put it, is what `status` shows.
    case inherited(fileDescriptor: Int32, path: String? = nil)
}
