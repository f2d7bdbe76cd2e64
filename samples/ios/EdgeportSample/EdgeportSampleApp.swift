import SwiftUI

@main
struct EdgeportSampleApp: App {
    var body: some Scene {
        WindowGroup { ContentView() }
    }
}
