plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "dev.edgeport.sample"
    compileSdk = 35

    defaultConfig {
        applicationId = "dev.edgeport.sample"
        minSdk = 26
        targetSdk = 35
        versionCode = 1
        versionName = "0.1.0"
    }
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions {
        jvmTarget = "17"
    }
    // .tflite, .litertlm and the parity sample's .bin files must stay uncompressed and byte-exact in the APK
    androidResources {
        noCompress += listOf("tflite", "litertlm", "bin")
    }
}

dependencies {
    implementation(project(":core"))  // manifest, parity sample, parity math, generation loop: plain Kotlin
    implementation("com.google.ai.edge.litert:litert:2.3.0")
    implementation("com.google.ai.edge.litert:litert-gpu:2.3.0")  // only for "Run on GPU"
    // the LLM screen (model.litertlm); the version edgeport's judge runs the bundle with (litert-lm-api)
    implementation("com.google.ai.edge.litertlm:litertlm-android:0.18.1")
    implementation("androidx.activity:activity-ktx:1.9.3")
}
