// The app's logic that needs no Android: manifest.json, the parity sample, parity math and the text-generation
// loop's bookkeeping. A plain Kotlin/JVM module, so `./gradlew :core:test` runs on any JVM, and edgeport's CI
// compiles these sources with kotlinc and runs them against real edgeport output (tests/test_android_contract.py).
import org.jetbrains.kotlin.gradle.dsl.JvmTarget

plugins {
    id("org.jetbrains.kotlin.jvm")
    id("org.jetbrains.kotlin.plugin.serialization")
}

java {
    sourceCompatibility = JavaVersion.VERSION_17
    targetCompatibility = JavaVersion.VERSION_17
}

kotlin {
    compilerOptions {
        jvmTarget.set(JvmTarget.JVM_17)
    }
}

dependencies {
    api("org.jetbrains.kotlinx:kotlinx-serialization-json:1.7.3")
    testImplementation("junit:junit:4.13.2")
}
