// eventually, Collected: shared by every test target.
@_exported import TestSupport
